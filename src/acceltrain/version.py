"""acceltrain's version: here, so that any module can name it without importing the package's public face."""

__version__ = "0.1.0"
