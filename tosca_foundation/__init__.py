"""The foundation both stages and the command line stand on, beside them (not inside stage 1):
errors (`errors`), names shown safely (`text`), folders owned (`folders`) and locked (`locks`),
files read and written whole (`files`, `atomic`), fingerprints, size limits (`limits`), settings,
plug-in and name registries (`registry`, `plugins`, `names`, `dataset_names`), the Dask link
(`scheduler`, `scheduler_link`, `cluster`, `processes`), device names (`devices`), what requests
offer as options (`options`, `arguments`), the package's version (`version`).

Import-light on purpose (stdlib at import; torch and dask only inside the functions that need them):
stage 2, `tosca cache` and the command line import it without loading the backbone side.
"""
