"""Specs as data: schemas/, strategies/, runs/ (TOML). Shipped inside the package as das.specs."""
