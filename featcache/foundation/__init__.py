"""The foundation both stages stand on: errors, names shown safely, folders owned and locked,
files written whole, fingerprints, size limits, the Dask scheduler choice and device names.

Import-light on purpose (stdlib, numpy at most; torch and dask only inside the functions that
need them): stage 2 and `tosca cache` import it without loading the backbone side.
"""
