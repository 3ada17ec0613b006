"""The service side of kstream: the `kstreamd` command line (and, later, its HTTP server)."""
