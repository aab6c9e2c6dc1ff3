"""Reference scoring: each scored generation's tokens, teacher-forced through a trusted reference
model, and the generation flagged `suspect` when its worst token is one the reference finds far
less likely than its own samples ever are (a threshold calibrated on those samples).

    score.py      pure: per-token log-probabilities -> anomaly score, implausible tokens
    calibrate.py  pure: calibration scores -> threshold for a false-flag rate
    http.py       a reference server speaking vLLM's prompt_logprobs (the mock does too)
    hf.py         an in-process Hugging Face transformers model (--reference-model)
    scorer.py     the soak's scorer: selection, budget, bounded backlog, calibration run
"""
