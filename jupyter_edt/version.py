"""The package version, importable without the package's extension points."""

__version__ = "0.1.0"
