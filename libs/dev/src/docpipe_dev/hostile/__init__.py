"""Hostile input, made here (nothing hostile is committed as a file): files and requests
built to make docpipe work far more than their size asks, one generator per attack.

- :mod:`docpipe_dev.hostile.word`: Word files whose text multiplies (spans, merges, list
  labels, notes) or whose parts are too big to parse;
- :mod:`docpipe_dev.hostile.pdf`: PDFs whose pages are too large to draw, slow to draw,
  or hold millions of characters;
- :mod:`docpipe_dev.hostile.zips`: zips whose directory lists a million members;
- :mod:`docpipe_dev.hostile.image`: images whose few KB state hundreds of millions of
  pixels, and a TIFF of more pages than a document may have;
- :mod:`docpipe_dev.hostile.corpus`: every hostile file with the kind it must fail with.

The tests feed them to real workers and the API; ``bench/hostile.py`` measures what each
costs the worker's pool process.
"""
