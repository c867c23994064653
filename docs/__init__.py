"""The manual's tools: cli_reference.py writes reference/cli.md from the CLI's parser, runnable.py finds the
blocks a test executes, make_figures.py draws the guides' pictures. Not pages (mkdocs.yml excludes *.py)."""
