"""The foundation both stages stand on: errors (`errors`), names shown safely (`text`), folders
owned (`folders`) and locked (`locks`), files read and written whole (`files`, `atomic`),
fingerprints, size limits (`limits`), the Dask scheduler choice (`scheduler`), device names
(`devices`), and the command line's face: what requests offer as options (`options`), how a
command meets its user (`commands`) and what the terminal shows (`terminal`).

Import-light on purpose (stdlib; rich and typer only in `terminal` and `commands`; torch and dask
only inside the functions that need them): stage 2 and `tosca cache` import it without loading
the backbone side.
"""
