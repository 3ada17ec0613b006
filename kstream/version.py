"""The version of kstream, in one place: the package exports it, `kstreamd --version` prints
it and the build reads it (pyproject.toml). A module of its own so that the service and the
build need not import the package's front (`kstream/__init__.py`) to learn it."""

__version__ = "0.1.0"
