"""The batched engine: G >= 1 configurations of one store and task split trained as one program.

Parameters of every configuration are stacked `[G, ...]`; r and s are zero-padded to the group's
largest (padding is exactly inert); per-configuration lr, L1, momentum, weight decay and seed live
in `[G]` tensors and generators. Forward and backward are written out (no autograd), into
preallocated buffers, with one fused momentum-SGD update per step. `tosca fit` is this engine with
G = 1; a sweep groups compatible points. Two steps take the same arguments and give the same
numbers: the compiled C step (the default on a CPU where it builds) and the PyTorch step (CUDA,
or a CPU without a compiler, or `TOSCA_STEP=torch`).

- `layout`: where each LuCA parameter lives in a configuration's flat parameter vector.
- `kernels`: the PyTorch step's fused forward and analytic backward (LuCA + classifier + CE).
- `native`: the compiled step (`csrc/luca_step.c`): built, checked and loaded.
- `steppers`: the inner loop of one task over either step.
- `optim`: the fused momentum-SGD update and the cosine learning-rate schedule.
- `trainer`: a group's modules, classifier and generators, trained task by task.
- `outputs`: module outputs on many rows (evaluation, prototypes, prediction).
- `evaluate`: every stored module on the test features, routed, scored per configuration.
- `device`: the step and thread settings, and the CPU thread policy.
- `memory`: how many configurations one engine run can hold.
- `errors`: numbers that went bad.
"""
