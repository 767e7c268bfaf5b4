"""The README's configuration reference names every gateway setting, flag and variable."""

import argparse
from pathlib import Path

from gateway import protocol as p

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
