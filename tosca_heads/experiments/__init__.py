"""What the commands ask of stage 2, one module each: the requests themselves (`requests`), a run
folder's files (`runfiles`) and training one (`runs`), sweeps (`sweeps`) and their results table
(`results`), baselines beside TOSCA (`comparison`), every router of a run (`report`), new images
classified (`predict`), the demo (`demo`) and the figures they draw (`plots`).
"""
