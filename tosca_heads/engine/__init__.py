"""The batched engine: G >= 1 configurations of one store and task split trained as one program.

Parameters of every configuration are stacked `[G, ...]`; r and s are zero-padded to the group's
largest (padding is exactly inert); per-configuration lr, L1, momentum, weight decay and
seed live in `[G]` tensors and generators. Forward and backward are written out (no autograd),
into preallocated buffers, with one fused momentum-SGD update per step. `tosca fit` is this engine
with G = 1; a sweep groups compatible points. The same code runs on CPU and CUDA.

- `layout`: where each LuCA parameter lives in a configuration's flat parameter vector.
- `kernels`: the fused forward and analytic backward of LuCA + cosine classifier + CE.
- `optim`: the fused momentum-SGD update and the cosine learning-rate schedule.
- `trainer`: a group's modules, classifier and generators, trained task by task.
- `evaluate`: every stored module on the test features, routed, scored per configuration.
"""
