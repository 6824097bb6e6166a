"""One-off studies behind figures of the docs, each run as a module: python -m studies.ae_probe (--help)."""
