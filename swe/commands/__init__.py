"""The jobs behind ``swe build|encode|evaluate|analyze``: each module has ``parser(prog)`` and
``main(argv, prog)``. ``pipelines/*.py`` are thin wrappers of these for ``ray job submit``."""
