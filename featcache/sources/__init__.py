"""Where images come from: datasets by name (`datasets`: folders, archives, arrays, each split's
samples and their fingerprints), the one rule for which files of a folder are images
(`listing`), archives unpacked once, bounded and locked (`archives`), and how any image file
becomes the 8-bit RGB a viewer shows (`pixels`). Below `images`: nothing here transforms or
decodes for a backbone.
"""
