"""The service side of kstream: the `kstreamd` command line, its HTTP server and registry."""
