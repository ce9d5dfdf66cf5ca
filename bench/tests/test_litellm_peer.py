"""bench/litellm_peer.py's pure parts (issue 46): the proxy's configuration and environment, where
its virtualenv goes, and the figures. No LiteLLM is installed or started here; the smoke run
(test_smoke.py) runs the script without it (--ours-only)."""

import json

import yaml

from bench.litellm_peer import MASTER_KEY, figures, litellm_config, litellm_env, litellm_home, ratio


def test_the_config_names_one_openai_model_at_the_scripted_model_a_master_key_and_no_database():
    written = json.dumps(litellm_config(llm_port=4321))  # as the bench writes config.yaml

    config = yaml.safe_load(written)  # LiteLLM reads it with PyYAML

    assert config["model_list"] == [{"model_name": "fake-model", "litellm_params": {
        "model": "openai/fake-model", "api_base": "http://127.0.0.1:4321/v1", "api_key": "sk-bench"}}]
    assert config["general_settings"]["master_key"] == MASTER_KEY
    assert "database_url" not in written
    assert config["general_settings"]["disable_spend_logs"] is True
    assert all(config["litellm_settings"][name] == [] for name in ("callbacks", "success_callback", "failure_callback"))


def test_the_proxy_gets_no_database_cache_or_model_of_ours_and_reads_its_cost_map_from_the_package():
    ours = {"PATH": "/usr/bin", "HOME": "/home/x", "DATABASE_URL": "sqlite:////tmp/b.sqlite3",
            "DATABASE_HOST": "db", "REDIS_URL": "redis://127.0.0.1:6379/1", "LLM_API_KEY": "sk-real",
            "OPENAI_API_KEY": "sk-real", "LITELLM_LOG": "DEBUG"}

    env = litellm_env(ours)

    assert env["PATH"] == "/usr/bin" and env["HOME"] == "/home/x"
    assert not {"DATABASE_URL", "DATABASE_HOST", "REDIS_URL", "LLM_API_KEY", "OPENAI_API_KEY"} & set(env)
    assert env["LITELLM_LOG"] == "ERROR"
    assert env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"


def test_the_virtualenv_goes_to_the_user_cache_per_version():
    assert str(litellm_home("1.108.7", {"HOME": "/home/x"})) == "/home/x/.cache/campus-agent-bench/litellm-1.108.7"
    assert str(litellm_home("1.110.2", {"HOME": "/home/x", "XDG_CACHE_HOME": "/var/cache/u"})) == (
        "/var/cache/u/campus-agent-bench/litellm-1.110.2")


def test_added_is_the_side_minus_the_floor_at_the_same_percentile():
    out = {(1, "direct"): [(12.0, 104.0), (10.0, 100.0), (11.0, 102.0)],
           (1, "ours"): [(30.0, 130.0), (14.0, 108.0), (15.0, 112.0)], (1, "ours", "cpu_ms"): 4.5}

    row = figures(out, 1, "ours")

    assert (row["ttfc_p50"], row["ttfc_p50_added"]) == (15.0, 4.0)
    assert (row["ttfc_p99"], row["ttfc_p99_added"]) == (30.0, 18.0)
    assert (row["end_p50_added"], row["end_p99_added"]) == (10.0, 26.0)
    assert row["cpu_ms"] == 4.5


def test_a_ratio_is_ours_over_theirs_and_none_where_theirs_adds_nothing():
    assert ratio(1.0, 2.0) == "0.50×"
    assert ratio(3.0, 2.0) == "1.50×"
    assert ratio(1.0, 0.0) == "n/a"
    assert ratio(1.0, -0.4) == "n/a"
    assert ratio(-0.2, 1.0) == "n/a"
