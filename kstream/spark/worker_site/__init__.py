"""A directory for the `PYTHONPATH` of Spark's Python workers, holding only `sitecustomize`
(see its docstring); a package so that it ships with kstream. Not imported by kstream."""
