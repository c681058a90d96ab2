"""RoutingTrainConfig.from_yaml reads through the guarded loader and names the file in every error."""

from __future__ import annotations

import pytest

from societas.marl.routing.train import RoutingConfigError, RoutingTrainConfig


@pytest.mark.parametrize(
    "raw,expected",
    [
        (b"\xff\xfesteps: 3\n", "cannot read {p}: not UTF-8 text (byte 0: invalid start byte)"),
        (b"steps: 0\n", "{p}: steps: Input should be greater than or equal to 1"),
        (b"steps: [1\n", "cannot read {p}: YAML syntax error at line 2, column 1"),
        (
            b"a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
            + b"".join(
                f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n".encode() for p, c in zip("abcdef", "bcdefg")
            ),
            "cannot read {p}: the document is too large",
        ),
    ],
)
def test_config_file_errors_name_the_file(tmp_path, raw, expected):
    p = tmp_path / "routing.yaml"
    p.write_bytes(raw)
    with pytest.raises(RoutingConfigError) as info:
        RoutingTrainConfig.from_yaml(p)
    assert str(info.value).startswith(expected.format(p=p))
