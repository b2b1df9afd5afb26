"""Features computed elsewhere, in and out of a store: `tosca import` reads arrays of any modality
(.npy/.npz, safetensors, Parquet/Arrow, a Hugging Face `datasets` folder saved to disk) into a
store written by the store's one writer, and `tosca export` writes a store to .npz, Parquet or a
`datasets` folder. Import-light: numpy, zarr and pyarrow load when a command reads or writes."""
