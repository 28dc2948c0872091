"""The browser tests: a package, so that their Chromium closes when they are done."""
