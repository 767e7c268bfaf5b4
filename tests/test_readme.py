"""The README says what the code does: every gateway setting, flag and variable, every
error code, and the `tts` inputs' defaults and ranges as the contract has them."""

import argparse
import re
from pathlib import Path

from gateway import settings as s
from python_backends import contract as c

README = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")


def test_every_gateway_setting_is_in_the_configuration_table():
    parser = argparse.ArgumentParser()
    s.add_arguments(parser)
    for action in parser._actions[1:]:
        flag = action.option_strings[0]
        env = action.help.split("(env ")[1].split(";")[0]
        assert f"| `{flag}` | `{env}` |" in README, flag


def test_every_error_code_is_documented():
    for code in c.ERROR_CODES:
        assert f"`{code}`" in README, code


def _number(value: float | int) -> str:
    return f"{value:,}" if isinstance(value, int) and abs(value) < 2**31 else f"{value:g}"


def test_the_tts_input_table_has_the_contracts_defaults_and_ranges():
    rows = {m[1]: m[2] for m in re.finditer(r"^\| `([A-Z_]+)` \| (.*)$", README, re.M)}
    for param in c.CHUNK_PARAMS:
        cells = [cell.strip() for cell in rows[param.name].split("|")]
        assert cells[1] == str(param.default), param.name
        assert cells[2] == f"{_number(param.minimum)} … {_number(param.maximum)}", param.name
    for param in c.VOICE_PARAMS:
        cells = [cell.strip() for cell in rows[param.name].split("|")]
        if param.maximum < 2**31:
            assert cells[2] == f"{_number(param.minimum)} … {_number(param.maximum)}", param.name
        else:
            assert cells[2] == f"≥ {_number(param.minimum)}", param.name
