"""perf/voice/end_to_end.py's summary and report, on turns made up for the test (no server)."""

from perf.voice import end_to_end as voice


def turn(mode, question, v2v_s, outcome, reply="Paris."):
    return {"mode": mode, "question": question, "voice_to_voice_s": v2v_s, "final_after_speech_s": 0.4,
            "decided_after_final_s": 0.1, "audio_after_final_s": v2v_s - 0.4, "word_error_rate": 0.0,
            "partial_gap_s": 0.6, "outcome": outcome, "llm_tokens": 30 if mode == "off" else 40,
            "held_discarded_s": 0.0, "reply": reply}


def test_the_summary_compares_each_mode_with_off_on_the_same_questions_and_the_report_judges_the_goals():
    turns = [turn("off", q, 2.0, "off") for q in "ab"] + [turn("greedy", q, 0.9, "held") for q in "ab"] + [
        turn("top_k", q, 1.5, "partial", reply="Lyon.") for q in "ab"]
    summary = voice.summarize(turns)
    assert summary["greedy"]["ratio_to_off"] == 0.45 and summary["greedy"]["outcomes"]["held"] == 2
    assert summary["greedy"]["extra_llm_tokens"] == 10 and summary["top_k"]["same_reply_as_off"] == 0
    listeners = [{"listeners": n, "final_after_speech_median_s": 0.4, "final_after_speech_max_s": 0.5 + n / 10,
                  "partial_gap_max_s": 0.6, "word_error_rate": 0.0, "cpu_per_audio_s": 0.2,
                  "real_time": 0.5 + n / 10 <= 1.0} for n in (1, 4, 8)]
    report = voice.table({"questions": 2, "top_k": 3, "max_tokens": 64, "summary": summary, "listeners": listeners})
    assert "0.45 (met)" in report and "longest gap 600 ms (missed)" in report
    assert "Dictation streams kept in real time: 4" in report


def test_replies_that_loop_or_leave_english_are_counted_with_their_length():
    quality = voice.reply_quality([
        "Paris is the capital. It is big.",
        "La femme de France, le capital de la femme de France.",  # a loop, and no letter outside ASCII
        "Paris est la capitale de la République.",
    ])
    assert quality["replies_looping"] == 1 and quality["replies_leaving_english"] == 1
    assert quality["reply_words_median"] == 7 and quality["reply_sentences_median"] == 1
