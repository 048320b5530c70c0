"""config.pbtxt integers past their field's range are a model-config error (found by
tools/fuzz/model_config.py: protobuf raised a bare ValueError)."""

from __future__ import annotations

import pytest

from pytriton_core.config.parse import parse_config_text
from pytriton_core.errors import ModelConfigError


@pytest.mark.parametrize(
    "text", ["max_batch_size: 2222222222222222222222", "max_batch_size: -9999999999"]
)
def test_an_integer_out_of_range_is_a_config_error(text: str) -> None:
    with pytest.raises(ModelConfigError, match="failed to parse model config"):
        parse_config_text(text, "config.pbtxt")
