"""The one writer of generated kernels' Python wrappers: run what it writes."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kernelpro.offline.codegen.wrapper import Wrapper, python_wrapper  # noqa: E402


def _compile(wrapper: Wrapper):
    namespace = {"torch": torch}
    exec("\n".join(python_wrapper(wrapper)), namespace)
    return namespace[wrapper.name]


def test_two_outputs_come_back_as_a_tuple_and_shapes_are_checked():
    add_and_scale = _compile(Wrapper(
        name="add_and_scale", doc="x + y, and 2 * (x + y)", args=["x", "y"], shapes=[(2, 3), (2, 3)],
        outputs=[((2, 3), "x.dtype"), ((2, 3), "x.dtype")], device="x.device",
        launch=["    torch.add(x, y, out=out0)", "    torch.mul(out0, 2, out=out1)"]))
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    total, doubled = add_and_scale(x, y.t().contiguous().t())
    assert torch.equal(total, x + y) and torch.equal(doubled, 2 * (x + y))
    with pytest.raises(AssertionError, match="add_and_scale: input shapes differ"):
        add_and_scale(torch.randn(3, 2), torch.randn(3, 2))
    assert add_and_scale.__doc__ == "x + y, and 2 * (x + y)"


def test_one_argument_one_output_and_a_dtype_check():
    negate = _compile(Wrapper(name="negate", doc="-x", args=["x"], shapes=[(4,)], outputs=[((4,), "x.dtype")],
                              device="x.device", launch=["    torch.neg(x, out=out0)"], dtype="torch.float32",
                              workspaces=["    scratch = torch.empty(1)"]))
    assert torch.equal(negate(torch.arange(4.0)), -torch.arange(4.0))
    with pytest.raises(AssertionError):
        negate(torch.arange(4.0, dtype=torch.float64))
