"""Issue 11 item 10: calibrate speaks the GPU container's ModelOpt ~=0.37 (dict form) as well as 0.47 (list form)."""

from __future__ import annotations

from trtkit.checkpoint.formats import RecipeOptions, modelopt_config
from trtkit.checkpoint.modelopt_forms import as_entries, in_form_of

# INT8 SmoothQuant as ModelOpt 0.37 writes its presets: a dict, "default" and "*" patterns first
SQ_0_37 = {"*weight_quantizer": {"num_bits": 8, "axis": 0}, "*input_quantizer": {"num_bits": 8, "axis": None},
           "*lm_head*": {"enable": False}, "default": {"enable": False}}


def test_dict_form_round_trips_through_entries() -> None:
    entries = as_entries(SQ_0_37)
    assert entries[0] == {"quantizer_name": "*weight_quantizer", "cfg": {"num_bits": 8, "axis": 0}}
    assert entries[2] == {"quantizer_name": "*lm_head*", "enable": False}
    assert in_form_of(SQ_0_37, entries) == SQ_0_37
    assert SQ_0_37["*lm_head*"] == {"enable": False}  # the preset itself is never mutated


def test_later_entries_still_win_in_the_dict_form() -> None:
    entries = as_entries(SQ_0_37) + [{"quantizer_name": "*[kv]_bmm_quantizer", "cfg": {"num_bits": 8, "axis": None}},
                                     {"quantizer_name": "*weight_quantizer", "enable": False}]
    merged = in_form_of(SQ_0_37, entries)
    assert isinstance(merged, dict)
    assert list(merged)[-1] == "*weight_quantizer" and merged["*weight_quantizer"] == {"enable": False}
    assert merged["*[kv]_bmm_quantizer"] == {"num_bits": 8, "axis": None}


def test_installed_modelopt_gets_its_own_form() -> None:
    import modelopt.torch.quantization as mtq

    config = modelopt_config("int8_sq", "int8", RecipeOptions())
    assert type(config["quant_cfg"]) is type(mtq.INT8_SMOOTHQUANT_CFG["quant_cfg"])
    entries = as_entries(config["quant_cfg"])
    assert entries[-1] == {"quantizer_name": "*lm_head*", "enable": False}
    assert {"quantizer_name": "*[kv]_bmm_quantizer", "cfg": {"num_bits": 8, "axis": None}} in entries


def test_weight_only_formats_need_no_weight_only_preset(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """ModelOpt 0.37 (the GPU container's) has no INT8_WEIGHT_ONLY_CFG: int8_wo and int4_wo start from
    INT8_DEFAULT_CFG with its input quantizers off, which is 0.47's weight-only preset entry for entry."""
    import modelopt.torch.quantization as mtq

    weight_only = getattr(mtq, "INT8_WEIGHT_ONLY_CFG", None)
    monkeypatch.delattr(mtq, "INT8_WEIGHT_ONLY_CFG", raising=False)
    for fmt, bits in (("int8_wo", 8), ("int4_wo", 4)):
        entries = as_entries(modelopt_config(fmt, "auto", RecipeOptions())["quant_cfg"])
        assert {"quantizer_name": "*input_quantizer", "enable": False} in entries
        assert {"quantizer_name": "*weight_quantizer", "cfg": {"num_bits": bits, "axis": 0}} in entries
    if weight_only is not None:
        assert as_entries(modelopt_config("int8_wo", "auto", RecipeOptions())["quant_cfg"])[:-1] == \
            as_entries(weight_only["quant_cfg"])
