"""perf/frameworks/agents.py's report: each plugin's median against our client's in its shape."""

from perf.frameworks.agents import report


def test_each_plugin_is_set_against_the_client_in_its_shape(capsys):
    seconds = {
        (1, "pipecat (a socket each)"): [0.110, 0.100, 0.120],
        (1, "client, a socket each"): [0.070, 0.080, 0.075],
        (1, "livekit (one socket)"): [0.090],
        (1, "client, one socket"): [0.095],
    }
    report(seconds, [1])
    cells = [[c.strip() for c in line.split("|")[1:-1]] for line in capsys.readouterr().out.splitlines()[2:]]
    rows = {row[1]: row[2:] for row in cells}
    assert rows["pipecat (a socket each)"] == ["3", "110.0", "118.0", "+35.0"]  # p90 within what was measured
    assert rows["livekit (one socket)"] == ["1", "90.0", "90.0", "-5.0"]
    assert rows["client, one socket"] == ["1", "95.0", "95.0", ""]
