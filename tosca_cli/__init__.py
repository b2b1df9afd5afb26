"""The `tosca` command line: the typer app (`app`), how answers are shown (`views`), where long
work stands (`progress`), what reaches the terminal (`terminal`) and how options become requests
and mistakes become one line (`commands`). Nothing here computes a number: each command reads its
options into one request of a package (`featcache`, `tosca_heads`), makes one call and shows what
comes back. Heavy libraries (torch, timm, dask, zarr, matplotlib) are imported inside the commands
that use them, so `tosca --help` starts at once."""
