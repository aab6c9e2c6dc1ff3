"""How each documented command is exercised. `tests/docs/test_documented_commands.py` fails for a
command in README.md or docs/*.md that is not listed here (and for an entry no document shows).

- `Run`: run here, in a fresh folder prepared with the files it names, against two mock servers
  that stand in for `http://127.0.0.1:8000` and `:8001`; `replace` shortens it (hours to
  seconds), `code` is the exit status it must end with, `creates` what it must write.
- `Serve`: a long-running server: started here, ready within a minute, stopped by SIGTERM (0).
- `Collect`: a pytest invocation: collected here (`--collect-only`), selecting at least one test.
- `Covered`: run by the named test (`tests/FILE.py::test_name`), which carries `marker` when it
  needs an environment (vLLM, a GPU, llama.cpp) and skips with the reason without it.
- `Names`: an inline mention of a command or flag (`soakgate audit`, `kill -9`) whose runs are
  the entries of the commands that start with `covers`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Run:
    replace: tuple[tuple[str, str], ...] = ()
    code: int = 0
    creates: tuple[str, ...] = ()
    shell: bool = False


@dataclass(frozen=True)
class Serve:
    replace: tuple[tuple[str, str], ...] = ()
    ready: str = "listening on"


@dataclass(frozen=True)
class Collect:
    pass


@dataclass(frozen=True)
class Covered:
    test: str
    marker: str | None = None


@dataclass(frozen=True)
class Names:
    covers: str


Entry = Run | Serve | Collect | Covered | Names

A_URL, B_URL = "http://127.0.0.1:8000", "http://127.0.0.1:8001"
CROSSTALK = "tests/checks/test_crosstalk.py::test_compare_and_report_judge_crosstalk_as_an_outcome_of_its_own"
STRUCTURED = "tests/checks/test_structured_output.py::test_compare_and_report_judge_invalid_structure_over_the_answers_judged"
STRUCTURED_LLAMA = "tests/realservers/test_llamacpp_structured.py::test_the_readme_soak_of_llama_cpp_with_a_json_schema"
NUMBERS = "tests/checks/test_numbers.py::test_compare_judges_inconsistent_numbers_as_an_outcome_of_their_own"
TWINS = "tests/checks/test_twins.py::test_compare_judges_twin_mismatch_as_an_outcome_of_its_own"
REFERENCE_COMPARE = "tests/reference/test_report.py::test_compare_outcome_suspect_uses_the_collapse_verdict_machinery"
DEMO = "tests/cli/test_demo_and_interrupt.py::test_demo_reports_an_exact_match"
LLAMA = "tests/realservers/test_llamacpp.py::test_soak_parses_usage_and_logprob_token_ids"
VLLM = "tests/realservers/test_vllm.py::test_campaign_eager_vs_compiled"
VLLM_CONTROL = "tests/realservers/test_vllm.py::test_positive_control_dropped_op"
CUDA_EXAMPLE = (
    "tests/campaign/test_vllm_cuda_example.py::"
    "test_the_example_runs_eight_gpus_against_a_vllm_that_keeps_vllms_memory_rules"
)
VLLM_FLUENT = "tests/realservers/test_vllm.py::test_fluent_control_caught_by_reference_scoring"
GPU = "tests/realservers/test_gpu_scripts.py::test_transformers_serve_campaign_on_a_gpu"
PREREGISTERED = (
    "tests/load/test_readme_workflow.py::test_plan_run_until_verdict_compare_as_the_readme_shows"
)
PILOT = "tests/stats/test_stats_cmd_plan.py::test_pilot_blocks_deliver_what_is_printed"
RESUME = "tests/load/test_resume_settings.py::test_resume_refuses_differing_flags_then_continues_with_the_stored_settings"
RAY_FLEET = (
    "tests/campaign/test_campaign_ray.py::"
    "test_the_readme_fleet_command_runs_six_units_per_config_each_on_its_recorded_node"
)
CAMPAIGN_RESUME = "tests/campaign/test_campaign_resume.py::test_sigkill_then_resume_reruns_nothing_and_loses_nothing"
INDEXED_JOB = "tests/store/test_merge.py::test_the_indexed_job_recipe_runs_as_documented"
EXTRAS = "tests/docs/test_documented_commands.py::test_documented_pip_extras_exist"
COLLAPSE = (
    "tests/report/test_collapse_context.py::"
    "test_the_context_names_the_requests_in_flight_the_server_load_and_its_uptime"
)
REPLAY_LOAD = (
    "tests/probes/test_replay.py::test_collapses_that_need_load_replay_only_under_load_or_never"
)
REPLAY_PROMPTS = (
    "tests/probes/test_replay.py::"
    "test_a_database_from_before_stored_prompts_replays_with_its_prompts_file"
)
DROPPED_REPLAY = "tests/bisect/test_controls.py::test_the_dropped_op_collapses_replay_as_any_input"
DROPPED_BISECT = (
    "tests/bisect/test_controls.py::test_bisect_names_the_module_the_stage_and_the_dropped_op"
)
WRONG_PASS = (
    "tests/bisect/test_controls.py::"
    "test_bisect_blames_inductors_post_grad_passes_for_a_wrong_custom_pass"
)
SHORT = (("--duration 2h", "--duration 3s"), ("--max-tokens 512", "--max-tokens 32"))

COMMANDS: dict[str, Entry] = {
    # README.md: quick start
    "pip install -e '.[dev,torch,llamacpp,nvml,ray]'": Covered(EXTRAS),
    "pip install -e .": Covered(EXTRAS),
    "soakgate demo": Covered(DEMO),
    "soakgate report soakgate-demo.sqlite --html report.html": Run(creates=("report.html",)),
    "python -m pytest": Collect(),
    "python -m pytest -n 0": Collect(),
    "bash .ci/run": Covered("tests/docs/test_documented_commands.py::test_ci_runs_the_suite"),
    # README.md: soaking and measuring
    "soakgate run --target gpu0=http://127.0.0.1:8000 --target gpu1=http://127.0.0.1:8001 "
    "--label b31-graph --concurrency 48 --max-tokens 512 --duration 2h --db runs.sqlite": Run(
        SHORT
    ),
    "soakgate report runs.sqlite": Run(),
    "soakgate report runs.sqlite --html report.html": Run(creates=("report.html",)),
    "soakgate compare runs.sqlite eager compiled": Run(),
    "soakgate plan --baseline-rate 0.002 --ratio 1.5 --power 0.8": Run(),
    "soakgate plan --baseline-rate 0.002 --ratio 1.5 --sequential --looks 5 --arms eager compiled "
    '--hypothesis "compiled collapses more" --write plan.toml': Run(creates=("plan.toml",)),
    "soakgate run --plan plan.toml --until-verdict --arm eager=http://127.0.0.1:8000 "
    "--arm compiled=http://127.0.0.1:8001 --db runs.sqlite": Covered(PREREGISTERED),
    "soakgate plan --pilot runs.sqlite --label eager --ratio 1.5 --blocks 8": Covered(PILOT),
    "soakgate compare runs.sqlite eager compiled --plan plan.toml": Covered(PREREGISTERED),
    "soakgate export runs.sqlite --format parquet": Run(creates=("runs.parquet",)),
    "soakgate export runs.sqlite --format csv --table runs --label compiled --out runs.csv": Run(
        creates=("runs.csv",)
    ),
    "soakgate export … \\| head": Covered(
        "tests/cli/test_ergonomics.py::test_export_into_a_closed_pipe_ends_quietly"
    ),
    "soakgate import DB FILE": Covered(
        "tests/load/test_storage_faults.py::test_a_full_disk_stops_the_soak_and_every_answered_row_is_kept"
    ),
    "kill -9": Covered(
        "tests/load/test_kill_and_resume.py::test_kill_9_loses_at_most_a_second_and_resume_completes"
    ),
    # README.md and docs/report.md: the release gate's control (issue 25)
    "soakgate campaign examples/gate-control.toml --db /tmp/gate-control.sqlite --fail-on-differ": (
        Covered(
            "tests/campaign/test_gate_control.py::"
            "test_the_flagged_configuration_fails_the_campaign_and_the_gate"
        )
    ),
    # README.md and docs/trace.md: the configuration search (issue 33)
    "soakgate plan --search examples/mock-search.toml": Run(),
    "soakgate search examples/mock-search.toml --db /tmp/mock-search.sqlite "
    "--write-campaign /tmp/minimal.toml": Covered(
        "tests/search/test_search_cli.py::"
        "test_the_example_names_the_two_knobs_at_half_a_percent_and_stores_every_probe"
    ),
    "soakgate search FILE": Names("soakgate search examples/"),
    "soakgate search": Names("soakgate search examples/"),
    "soakgate plan --search FILE": Names("soakgate plan --search "),
    "soakgate search examples/vllm-cpu-search.toml --db vllm-search.sqlite": Covered(
        "tests/realservers/test_vllm_search.py::test_search_names_the_compilation_mode_among_five_knobs",
        "vllm",
    ),
    # README.md: campaigns, sweeps, probes
    "soakgate campaign examples/ray-mock-fleet.toml --db /tmp/fleet.sqlite": Covered(RAY_FLEET),
    # the example's graph servers die once each on purpose: a crash is a finding (exit 1)
    "soakgate campaign examples/mock-campaign.toml --db /tmp/mock-campaign.sqlite": Run(
        (("/tmp/mock-campaign.sqlite", "out/mock-campaign.sqlite"),),
        code=1,
        creates=("out/mock-campaign.sqlite", "out/mock-campaign.logs"),
    ),
    "soakgate sweep --target http://127.0.0.1:8000 --concurrency 24,48,96,192 "
    "--requests-per-level 2000": Run(
        (("24,48,96,192", "2,4"), ("--requests-per-level 2000", "--requests-per-level 24"))
    ),
    "soakgate determinism --target a=http://127.0.0.1:8000 --target b=http://127.0.0.1:8001 "
    "--prompt-count 20": Run((("--prompt-count 20", "--prompt-count 3"),)),
    "soakgate run --target compiled=http://127.0.0.1:8001 --reference eager=http://127.0.0.1:8000 "
    "--requests 5000": Run((("--requests 5000", "--requests 40"),)),
    "soakgate determinism": Names("soakgate determinism "),
    "soakgate compare runs.sqlite eager compiled --outcome suspect": Covered(REFERENCE_COMPARE),
    "soakgate run --target compiled=http://127.0.0.1:8001 --canaries --requests 2000 "
    "--db runs.sqlite": Run(),
    "soakgate compare runs.sqlite eager compiled --outcome crosstalk": Covered(CROSSTALK),
    "soakgate run --target http://127.0.0.1:8090 --label llamacpp --response-format "
    "examples/answer-schema.json --structure-via llamacpp --requests 400 --max-tokens 160 "
    "--db structured.sqlite": Covered(STRUCTURED_LLAMA, "llamacpp"),
    "soakgate compare runs.sqlite eager compiled --outcome invalid_structure": Covered(STRUCTURED),
    "soakgate run --target http://127.0.0.1:8000 --logprobs --top-logprobs 5 --requests 2000 "
    "--db runs.sqlite": Run((("--requests 2000", "--requests 40"),)),
    "soakgate compare runs.sqlite eager compiled --outcome inconsistent": Covered(NUMBERS),
    "soakgate run --target http://127.0.0.1:8000 --twin-fraction 0.05 --requests 2000 "
    "--db runs.sqlite": Run((("--requests 2000", "--requests 40"),)),
    "soakgate compare runs.sqlite eager compiled --outcome twin_mismatch": Covered(TWINS),
    "soakgate run --target compiled=http://127.0.0.1:8001 --score-reference http://127.0.0.1:8000 "
    "--calibration 5000 --requests 5000": Run(
        (("--requests 5000", "--requests 40"), ("--calibration 5000", "--calibration 999"))
    ),
    # README.md and docs/trace.md: from a collapse to its cause
    "soakgate report runs.sqlite --collapse ID": Covered(COLLAPSE),
    "soakgate replay runs.sqlite --collapsed --target URL": Covered(REPLAY_LOAD),
    "soakgate bisect MODEL": Names("soakgate bisect "),
    "soakgate bisect": Names("soakgate bisect "),
    "soakgate report DB --html FILE": Names("soakgate report "),
    "soakgate report DB --collapse ID": Covered(COLLAPSE),
    "soakgate replay DB --collapsed --target URL": Covered(REPLAY_LOAD),
    "soakgate replay DB --collapsed [--run R] --target [NAME=]URL [--repeats N] [--max-rows M] "
    "[--prompts FILE] [--model NAME]": Covered(REPLAY_PROMPTS),
    "soakgate replay DB --collapsed --target URL [--max-failures K] [--max-time DURATION] "
    "[--timeout DURATION]": Covered(
        "tests/probes/test_replay_bounds.py::"
        "test_a_target_that_keeps_failing_stops_the_replay_with_exit_2"
    ),
    "soakgate bisect MODEL [--prompt TEXT | --from-db DB --request ID] [--import MODULE] "
    "[--layers N] [--backend MODULE:NAME] [--repro FILE] [--dtype D] [--rtol R] [--atol A] "
    "[--verbose]": Covered(DROPPED_BISECT, "torch"),
    "soakgate mock-server --port 8000 --seed 7 --tokens-per-s 800 --burst-enter 0.3 "
    "--burst-exit 0.1 --burst-collapse-rate 0.9 --burst-min-in-flight 4": Serve(
        (("--port 8000", "--port 0"),)
    ),
    "soakgate run --target gpu0=http://127.0.0.1:8000 --label compiled --duration 30s "
    "--concurrency 8 --max-tokens 48 --db runs.sqlite": Run((("--duration 30s", "--duration 3s"),)),
    "soakgate report runs.sqlite --collapse ef3a442dd944-1066": Covered(COLLAPSE),
    "soakgate replay runs.sqlite --collapsed --target gpu0=http://127.0.0.1:8000": Run(
        (("--collapsed", "--collapsed --repeats 1 --max-rows 2"),)  # the clean mock: never
    ),
    "python -m tests.hfserve ../shared/models/tiny-llama-8k --dropped-op --port 8000": Covered(
        DROPPED_REPLAY, "torch"
    ),
    "soakgate run --target cpu0=http://127.0.0.1:8000 --label compiled --requests 6 "
    "--concurrency 3 --max-tokens 16 --no-stream --db control.sqlite": Covered(
        DROPPED_REPLAY, "torch"
    ),
    "soakgate replay control.sqlite --collapsed --target cpu0=http://127.0.0.1:8000 --repeats 2 "
    "--max-rows 2": Covered(DROPPED_REPLAY, "torch"),
    "soakgate bisect ../shared/models/tiny-llama-8k --import "
    "examples/bisect/dropped_op_transformers.py --layers 2 --from-db control.sqlite --request "
    "9c917f512f63-0": Covered(DROPPED_BISECT, "torch"),
    "soakgate bisect examples/bisect/custom_backend.py:model --backend "
    "examples/bisect/custom_backend.py:backend": Covered(
        "tests/bisect/test_controls.py::"
        "test_a_custom_backends_own_pass_is_bisected_only_when_the_backend_is_kept",
        "torch",
    ),
    "soakgate bisect examples/bisect/compile_only_path.py:model": Covered(
        "tests/bisect/test_tokens.py::"
        "test_a_module_the_compiled_program_never_calls_is_said_to_be_not_called",
        "torch",
    ),
    "soakgate bisect examples/bisect/wrong_post_grad_pass.py:model --verbose": Covered(
        WRONG_PASS, "torch"
    ),
    # README.md: audit, mock server
    "soakgate audit": Names("soakgate audit "),
    "soakgate audit path/to/kernels/": Run((("path/to/kernels/", "kernels/"),), code=1),
    "soakgate audit path/to/kernels/ --fix": Run((("path/to/kernels/", "kernels/"),), code=1),
    "soakgate mock-server --port 8000": Serve((("--port 8000", "--port 0"),)),
    "soakgate mock-server --help": Run(),
    # README.md and docs/real-servers.md: llama.cpp
    "pip install -e '.[llamacpp]'": Covered(EXTRAS),
    "pip install -e '.[ray]'": Covered(EXTRAS),
    "soakgate report /tmp/fleet.sqlite": Covered(RAY_FLEET),
    "python scripts/make_gguf.py /tmp/tiny-llama-8k.gguf": Covered(LLAMA, "llamacpp"),
    "python -m soakgate.servers.llamacpp --model /tmp/tiny-llama-8k.gguf --port 8090 --parallel 8 "
    "--threads 1 &": Covered(LLAMA, "llamacpp"),
    "soakgate run --target http://127.0.0.1:8090 --label llamacpp --concurrency 8 --duration 60s "
    "--max-tokens 128 --logprobs --db llamacpp.sqlite": Covered(LLAMA, "llamacpp"),
    "pip install xllamacpp": Covered(LLAMA, "llamacpp"),
    "pip download --no-deps xllamacpp": Covered(LLAMA, "llamacpp"),
    "curl -s http://127.0.0.1:8090/health": Covered(LLAMA, "llamacpp"),
    "kill %1": Covered(
        "tests/realservers/test_llamacpp.py::test_stream_ends_with_done_after_finish_and_usage",
        "llamacpp",
    ),
    "python -m soakgate.servers.llamacpp": Names("python -m soakgate.servers.llamacpp "),
    "soakgate run": Names("soakgate run "),
    "python -m pytest tests/realservers -k default_detectors -s": Collect(),
    "python -m pytest tests/realservers/test_llamacpp.py -q": Collect(),
    'python -m pytest tests/realservers/test_llamacpp.py -q -m "not slow"': Collect(),
    'python -m pytest tests/realservers -k "default_detectors or cut" -s': Collect(),
    "soakgate run --target http://127.0.0.1:8090 --requests 300 --max-tokens 16 --seed 1 "
    "--endpoint chat --db cut.sqlite": Covered(
        "tests/realservers/test_llamacpp.py::"
        "test_outputs_cut_by_a_small_budget_are_flagged_only_where_they_end_in_a_repetition",
        "llamacpp",
    ),
    # README.md and docs/real-servers-vllm.md: vLLM
    "scripts/setup-vllm-cpu.sh /work/venvs/vllm-cpu": Covered(VLLM, "vllm"),
    "scripts/setup-vllm-cpu.sh": Covered(VLLM, "vllm"),
    "export SOAKGATE_VLLM_PYTHON=/work/venvs/vllm-cpu/bin/python": Covered(VLLM, "vllm"),
    "mkdir -p ~/soakgate-runs": Covered(
        "tests/docs/test_documented_commands.py::test_documented_campaigns_keep_logs_beside_a_chosen_database"
    ),
    "soakgate campaign examples/vllm-cpu-campaign.toml --db ~/soakgate-runs/vllm-cpu.sqlite": Covered(
        VLLM, "vllm"
    ),
    "soakgate compare ~/soakgate-runs/vllm-cpu.sqlite eager compiled": Covered(VLLM, "vllm"),
    "soakgate campaign examples/vllm-cpu-dropped-op-campaign.toml --db ~/soakgate-runs/control.sqlite": Covered(
        VLLM_CONTROL, "vllm"
    ),
    # docs/campaigns.md: eight vLLMs on an 8-GPU node (a stand-in vllm keeps vLLM's memory rules)
    "soakgate campaign examples/vllm-cuda-campaign.toml --db ~/soakgate-runs/vllm-cuda.sqlite": (
        Covered(CUDA_EXAMPLE)
    ),
    "soakgate compare ~/soakgate-runs/vllm-cuda.sqlite eager compiled": Covered(CUDA_EXAMPLE),
    "python -m pytest -m vllm": Collect(),
    "python -m vllm.entrypoints.openai.api_server --help": Covered(VLLM, "vllm"),
    "python -m vllm.entrypoints.openai.api_server": Covered(VLLM, "vllm"),
    "python -m vllm.entrypoints.openai.api_server --model ../shared/models/tiny-llama-8k --dtype "
    "float32 --max-model-len 2048": Covered(VLLM, "vllm"),
    "scripts/serve-vllm-cpu.sh --port 8000 --eager": Covered(VLLM, "vllm"),
    "scripts/serve-vllm-cpu.sh --port 8001": Covered(VLLM, "vllm"),
    "soakgate campaign examples/vllm-cpu-campaign.toml --db /tmp/vw/meas/vllm-cpu.sqlite": Covered(
        VLLM, "vllm"
    ),
    "soakgate report /tmp/vw/meas/vllm-cpu.sqlite --html /tmp/vw/meas/report.html": Covered(
        VLLM, "vllm"
    ),
    "soakgate compare /tmp/vw/meas/vllm-cpu.sqlite eager compiled": Covered(VLLM, "vllm"),
    "soakgate campaign examples/vllm-cpu-dropped-op-campaign.toml --db "
    "/tmp/vw/ctl/vllm-control.sqlite": Covered(VLLM_CONTROL, "vllm"),
    "soakgate compare /tmp/vw/ctl/vllm-control.sqlite eager compiled": Covered(
        VLLM_CONTROL, "vllm"
    ),
    "soakgate audit examples/vllm-dropped-op-plugin": Run(code=1),
    "SOAKGATE_DROPPED_OP=fluent scripts/serve-vllm-cpu.sh --port 8002": Covered(
        VLLM_FLUENT, "vllm"
    ),
    "python -m tests.realservers.fluent_truth seeded http://127.0.0.1:8000 http://127.0.0.1:8002 "
    "../shared/models/tiny-llama-8k 120": Covered(VLLM_FLUENT, "vllm"),
    "soakgate run --target fluent=http://127.0.0.1:8002 --target clean=http://127.0.0.1:8001 "
    "--model ../shared/models/tiny-llama-8k --score-reference http://127.0.0.1:8000 --requests 400 "
    "--max-tokens 32 --top-p 0.95 --db fluent.sqlite": Covered(VLLM_FLUENT, "vllm"),
    "python -m tests.realservers.fluent_truth tally fluent.sqlite http://127.0.0.1:8000 "
    "../shared/models/tiny-llama-8k": Covered(VLLM_FLUENT, "vllm"),
    "SOAKGATE_VLLM_PYTHON=/work/venvs/vllm-cpu/bin/python python -m pytest "
    "tests/realservers/test_vllm.py -q -n 0 -k fluent": Collect(),
    "SOAKGATE_VLLM_PYTHON=/work/venvs/vllm-cpu/bin/python python -m pytest "
    "tests/realservers/test_vllm.py -q -n 0 -k whole_distribution": Collect(),
    "SOAKGATE_VLLM_PYTHON=/work/venvs/vllm-cpu/bin/python python -m pytest "
    "tests/realservers/test_vllm.py -q": Collect(),
    "soakgate report --html": Names("soakgate report "),
    "soakgate run --model PATH": Names("soakgate run "),
    # README.md and docs/real-servers-vllm.md: transformers serve on a GPU
    "scripts/gpu/fetch-wheels.sh": Covered(GPU, "gpu"),
    "mkdir -p .model && cp -r ../shared/models/tiny-llama-8k/. .model/": Covered(GPU, "gpu"),
    "mkdir -p .model && cp -r ../shared/models/tiny-llama-8k/. .model/ && echo /.model/ >> "
    ".git/info/exclude": Covered(GPU, "gpu"),
    "bash scripts/gpu/transformers_serve_campaign.sh .model --configs compiled,compiled-dropped-op "
    "--concurrency 32": Covered(GPU, "gpu"),
    "bash scripts/gpu/transformers_serve_campaign.sh .model": Covered(GPU, "gpu"),
    "bash scripts/gpu/transformers_serve_campaign.sh .model --configs compiled,compiled-dropped-op": Covered(
        GPU, "gpu"
    ),
    # docs/real-servers.md: the GPU script run again (2026-12-01)
    "PYTHONPATH=/tmp/site:src python3 scripts/gpu_nvml_probe.py --seconds 8": Covered(
        "tests/realservers/test_gpu_scripts.py::test_the_nvml_probe_reads_the_gpu", "gpu"
    ),
    "bash scripts/gpu/transformers_serve_campaign.sh .model --configs compiled,compiled-dropped-op "
    "--concurrency 32 --budget 470": Covered(GPU, "gpu"),
    "OUT=/tmp/vw/gpuout bash scripts/gpu/transformers_serve_campaign.sh "
    "/work/shared/models/tiny-llama-8k --mock --minutes 0.3 --configs "
    "eager,compiled,compiled-dropped-op --budget 240": Covered(
        "tests/realservers/test_gpu_scripts.py::test_the_campaign_script_runs_end_to_end_with_the_mock"
    ),
    # docs/audit.md
    "soakgate audit PATH... [--format text|json|sarif] [--fail-on SEVERITY] [--fix [--write]]": Covered(
        "tests/audit/test_cli.py::test_fix_write_rewrites_and_reaudits"
    ),
    "soakgate audit --compare OLD.so NEW.so [--format json]": Covered(
        "tests/audit/test_cli.py::test_compare_shows_changed_schemas"
    ),
    'soakgate audit verify MODULE[:ns::op] --inputs "f32[4,8]; f32[8]; 1e-5" [--device cuda] '
    "[--no-opcheck]": Covered(
        "tests/audit/test_verify_cwd.py::test_verify_imports_a_module_from_the_current_folder",
        "torch",
    ),
    "soakgate audit verify MODULE[:ns::op] --inputs SPEC": Covered(
        "tests/audit/test_verify_cwd.py::test_verify_imports_a_module_from_the_current_folder",
        "torch",
    ),
    "python bench/bench_capacity.py --rounds 3": Covered(
        "tests/bench/test_bench_smoke.py::"
        "test_bench_capacity_prints_cpu_per_request_in_flight_and_memory_for_each_shape"
    ),
    "python bench/bench_latency.py": Covered(
        "tests/bench/test_bench_smoke.py::test_bench_latency_prints_level_power_and_coverage_with_errors"
    ),
    "python bench/bench_audit.py [--macros]": Covered(
        "tests/bench/test_bench_smoke.py::test_bench_audit_prints_the_scan_time_and_finds_every_op"
    ),
    "python bench/bench_audit_accuracy.py [--verbose]": Covered(
        "tests/bench/test_bench_smoke.py::test_bench_audit_accuracy_without_its_corpus_says_so"
    ),
    "soakgate run --max-response-bytes": Names("soakgate run "),
    "soakgate audit PATH --fix": Covered(
        "tests/audit/test_fix_apply.py::test_the_diff_of_an_absolute_path_applies_in_the_current_folder"
    ),
    "PYTHONPATH=src python scripts/gpu_audit_control.py": Covered(
        "tests/audit/test_control.py::test_aot_eager_drops_unannotated_ops_and_keeps_fixed_ones",
        "torch",
    ),
    "soakgate audit csrc/ python/ --format sarif > audit.sarif || true": Run(
        (("python/", "kernels/kernlib/"), ("csrc/", "kernels/csrc/")),
        creates=("audit.sarif",),
        shell=True,
    ),
    # docs/campaigns.md
    "soakgate campaign campaign.toml --db runs.sqlite": Covered(
        "tests/campaign/test_campaign_faults.py::test_guard_records_the_fault_restarts_and_the_soak_completes"
    ),
    "soakgate campaign campaign.toml --db runs.sqlite --resume": Covered(CAMPAIGN_RESUME),
    "soakgate merge shard-0.sqlite shard-1.sqlite shard-2.sqlite --into all.sqlite": Covered(
        "tests/store/test_merge.py::test_three_shards_merge_into_the_sum_of_their_reports"
    ),
    'soakgate run --target "node$JOB_COMPLETION_INDEX-gpu0=http://127.0.0.1:8000" --target '
    '"node$JOB_COMPLETION_INDEX-gpu1=http://127.0.0.1:8001" --label b31-graph --duration 2h --db '
    '"/shards/shard-$JOB_COMPLETION_INDEX.sqlite"': Covered(INDEXED_JOB),
    "soakgate merge": Names("soakgate merge "),
    # docs/monitoring.md
    "soakgate run --target gpu0=http://127.0.0.1:8000 --target gpu1=http://127.0.0.1:8001 "
    "--label baseline --duration 2h --db runs.sqlite --metrics-port 9400": Run(
        (("--duration 2h", "--duration 3s"), ("--metrics-port 9400", "--metrics-port 0"))
    ),
    "soakgate campaign examples/mock-campaign.toml --db /tmp/mock-campaign.sqlite "
    "--metrics-port 9400": Run(
        (
            ("/tmp/mock-campaign.sqlite", "out/mock-campaign.sqlite"),
            ("--metrics-port 9400", "--metrics-port 0"),
        ),
        code=1,
        creates=("out/mock-campaign.sqlite", "out/mock-campaign.logs"),
    ),
    "soakgate merge /shards/shard-*.sqlite --into /shards/all.sqlite": Covered(INDEXED_JOB),
    "soakgate report /shards/all.sqlite": Covered(INDEXED_JOB),
    "soakgate merge all.sqlite late.sqlite --into all2.sqlite": Covered(INDEXED_JOB),
    "soakgate compare": Names("soakgate compare "),
    "soakgate run --reference": Names(
        "soakgate run --target compiled=http://127.0.0.1:8001 --reference"
    ),
    "pip install nvidia-ml-py": Covered(EXTRAS),
    "PYTHONPATH=src python scripts/gpu_nvml_probe.py": Covered(
        "tests/realservers/test_gpu_scripts.py::test_the_nvml_probe_reads_the_gpu", "gpu"
    ),
    "soakgate run --resume": Covered(RESUME),
    # docs/report.md
    "soakgate run --target gpu0=http://127.0.0.1:8000 --label b31-graph --concurrency 48 "
    "--duration 3d --db runs.sqlite --html live.html --report-every 10m": Run(
        (("--duration 3d", "--duration 4s"), ("--report-every 10m", "--report-every 1s")),
        creates=("live.html",),
    ),
    "soakgate report": Names("soakgate report "),
    "soakgate export": Names("soakgate export "),
    "soakgate report DB [--format table|json|csv|markdown] [--html FILE] [--no-clustering]": Covered(
        "tests/cli/test_ergonomics.py::test_report_fits_the_terminal_and_machines_keep_their_formats"
    ),
    "soakgate compare DB A B [--allow-unit-mismatch] [--alpha 0.05] [--fail-on-differ] "
    "[--seed N]": Covered(
        "tests/report/test_compare.py::test_fail_on_differ_gates_a_pipeline_by_exit_status"
    ),
    "soakgate compare DB A B --fail-on-differ [--allow-crashes] [--configurations-only] "
    "[--outcome NAME]": Covered(
        "tests/report/test_gate_report.py::"
        "test_compare_judges_every_outcome_and_the_gate_fails_on_the_crashes"
    ),
    "soakgate compare DB --baseline LABEL [--seed N]": Covered(
        "tests/report/test_compare.py::test_baseline_family_honours_the_seed"
    ),
    "soakgate compare DB [A B] --plan plan.toml": Covered(
        "tests/report/test_compare.py::test_plan_registered_before_the_data_is_applied_exactly"
    ),
    "soakgate plan --blocks K": Names("soakgate plan "),
    "soakgate plan ... --blocks 8": Names("soakgate plan "),
    "soakgate plan": Names("soakgate plan "),
    "soakgate plan --pilot": Names("soakgate plan "),
    "soakgate export DB --format parquet|csv|jsonl [--table generations|runs|events] "
    "[--run ID]... [--label L]... [--out FILE]": Covered(
        "tests/report/test_export.py::test_run_and_label_filters_keep_only_those_runs"
    ),
    "soakgate plan ... --write plan.toml": Names("soakgate plan "),
    "soakgate run --plan plan.toml": Names("soakgate run --plan plan.toml"),
    "soakgate run --reference URL": Names(
        "soakgate run --target compiled=http://127.0.0.1:8001 --reference"
    ),
    "soakgate run --target gpu0=C --reference C --label eager --requests 1000 --concurrency 8 "
    "--max-tokens 32 --token-ids --reference-fraction 0.2 --db diff.sqlite": Run(
        (
            ("gpu0=C --reference C", f"gpu0={B_URL} --reference {B_URL}"),
            ("--requests 1000", "--requests 40"),
        ),
    ),
    "soakgate run --target gpu0=P --reference C --label compiled ...": Covered(
        "tests/probes/test_differential.py::test_perturbed_generations_are_found_at_the_configured_rate"
    ),
    "soakgate run --target gpu0=P --reference C --reference S --label shaky ...": Covered(
        "tests/probes/test_differential.py::test_nondeterministic_reference_makes_the_baseline_uninformative"
    ),
    "soakgate report diff.sqlite --format markdown; soakgate compare diff.sqlite eager compiled": Run(
        shell=True
    ),
    "soakgate sweep": Names("soakgate sweep "),
    "export --format parquet": Names("soakgate export runs.sqlite --format parquet"),
    "soakgate mock-server --seed 4 --tokens-per-s 0 --collapse-rate 0.004 --fault-rate "
    "http_500=0.002": Serve(),
    "soakgate mock-server --seed 3 --tokens-per-s 0 --collapse-rate 0.002 --burst-enter 0.003 "
    "--burst-exit 0.05 --burst-collapse-rate 0.6": Serve(),
    "soakgate run --target gpu0=URL_OF_THE_FIRST --label eager --requests 5000 --concurrency 8 "
    "--max-tokens 128 --no-stream --db demo.sqlite": Run(
        (("URL_OF_THE_FIRST", A_URL), ("--requests 5000", "--requests 40"))
    ),
    "soakgate run --target gpu0=URL_OF_THE_SECOND --label graph --requests 5000 --concurrency 8 "
    "--max-tokens 128 --no-stream --db demo.sqlite": Run(
        (("URL_OF_THE_SECOND", B_URL), ("--requests 5000", "--requests 40"))
    ),
    "soakgate report demo.sqlite --html demo.html": Run(creates=("demo.html",)),
    "soakgate compare demo.sqlite eager graph": Run(),
}
