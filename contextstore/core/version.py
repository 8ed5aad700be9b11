"""The package's version: its one record (``contextstore.__version__``; the build reads it from
here, pyproject.toml's ``[tool.hatch.version]``)."""

__version__ = "0.1.0"
