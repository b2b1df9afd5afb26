"""The one layout spec (engine/layout.py) against the reference module (method/luca.py): the same
parameters, in the same order, with the same shapes and count, for every flow; the compiled
step's slot table is generated from it."""

from __future__ import annotations

import pytest
import torch

from tosca_heads.engine import native
from tosca_heads.engine.layout import FLOW_PARTS, SLOTS, ParamLayout, parameter_count
from tosca_heads.method.luca import FLOWS, LuCA
from tosca_heads.studies.suite.claims import luca_parameters

SHAPES = [(768, 48, 48), (32, 4, 7), (1280, 80, 3), (5, 1, 1)]


@pytest.mark.parametrize("flow", FLOWS)
@pytest.mark.parametrize(("d", "r", "s"), SHAPES)
def test_the_spec_is_the_reference_modules_state_dict(flow: str, d: int, r: int, s: int) -> None:
    reference = LuCA(d, r, s, flow)
    shapes = {name: tuple(t.shape) for name, t in reference.state_dict().items()}
    layout = ParamLayout(d, r, s, flow)
    assert list(layout.state_shapes().items()) == list(shapes.items())  # names, order and shapes
    assert parameter_count(d, r, s, flow) == layout.size == reference.num_parameters()


def test_every_flow_has_parts_and_every_slot_a_part() -> None:
    assert set(FLOW_PARTS) == set(FLOWS)
    assert {spec.part for spec in SLOTS} == {part for parts in FLOW_PARTS.values() for part in parts}


def test_the_parameter_count_of_the_paper_is_the_specs() -> None:
    """method.md §3: 149,808 per module at d = 768, r = s = 48; the suite's claim counts with it."""
    assert parameter_count(768, 48, 48) == 149_808
    for d, r, s in SHAPES:
        assert luca_parameters(d, r, s) == parameter_count(d, r, s, "tosca")


def test_a_round_trip_through_the_padded_layout_keeps_the_reference_state() -> None:
    torch.manual_seed(0)
    module = LuCA(16, 3, 5, "tosca")
    layout = ParamLayout(16, 8, 8, "tosca")
    flat = layout.pack(module.state_dict(), 3, 5)
    state = layout.unpack(flat, 3, 5)
    for name, value in module.state_dict().items():
        assert torch.equal(state[name], value)


def test_the_compiled_steps_slot_table_is_generated_from_the_spec() -> None:
    """The header the build writes lists the spec's slots in its order, and the ctypes mirrors of
    both argument structs carry one offset field per slot in the same order."""
    header = native.slots_header()
    fields = [spec.field for spec in SLOTS]
    assert f"#define TOSCA_SLOTS(X) {' '.join(f'X({f})' for f in fields)}" in header
    assert f'"{",".join(spec.name for spec in SLOTS)}"' in header
    for struct in (native.StepArgs, native.ForwardArgs):
        offsets = [name for name, _ in struct._fields_ if name.startswith("off_")]
        assert offsets == [f"off_{f}" for f in fields]
    layout = ParamLayout(8, 2, 3, "calibrator")
    offsets = native.slot_offsets(layout)
    assert offsets["off_cal_down_w"] == 0 and offsets["off_cal_up_w"] == 8 * 3
    assert offsets["off_down_w"] == -1  # a slot the flow does not hold
