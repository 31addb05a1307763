"""The package version (its own module, so the library reads it without importing ``swe``)."""

__version__ = "0.1.0"
