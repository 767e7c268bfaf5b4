"""The goals: whether a soak's results miss one, which makes its exit status 1."""

from __future__ import annotations


def missed(results: dict) -> bool:
    """A goal of zero missed: errors, leaks, a fault not recovered from, stalls."""
    leaks = (results["leaked_tts_requests"] or 0) + results["pending_requests"] + results["leaked_shm_segments"]
    leaks += results["stubs_left_running"] + results["shm_left_after_exit"]
    unrecovered = results["chaos"]["unrecovered"] if results["chaos"] else 0
    return bool(missed_errors_goal(results) or leaks or unrecovered or missed_stall_goal(results))


def missed_errors_goal(results: dict) -> bool:
    """An error; where a fault needs a resume (tts, all), an error but a new stream's refusal
    while a stage was down."""
    if not results["chaos"] or results["chaos"]["set"] == "vocoder":
        return results["errors"] > 0
    st = results["streams"]
    return results["errors"] > st["errored_refused"] or st["hung"] > 0


def missed_stall_goal(results: dict) -> bool:
    """A stall over 1.5 s where no fault needs a resume (no chaos, or the vocoder's); past
    the resume bound where one does."""
    which, st = results["chaos"] and results["chaos"]["set"], results["stalls"]
    if which in (None, "vocoder"):
        return st["all"]["over_1_5_s"] > 0
    past_bound = bool(st["resume_bound_s"]) and st["resumed"]["longest_s"] > st["resume_bound_s"]
    return past_bound or st["elsewhere"]["over_1_5_s"] > 0
