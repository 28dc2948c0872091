"""The pages, one module per area: signing in, runs, batches, reviews, documents."""
