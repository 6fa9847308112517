"""The farm-side variables of trainer.core.envvars, and that importing cue_plugin imports neither pycue nor pyoutline."""

import subprocess
import sys

from trainer.core.envvars import ENV_TABLE, environ_with, read_farm_env


def test_read_farm_env():
    env = read_farm_env({"CUE_JOB_ID": " j1 ", "CUEBOT_HOSTS": "a:8443, b", "CUETRAIN_TEMPLATE_PATH": "/x:/y",
                         "CUETRAIN_MAIN_HOST": "", "SHOW": "demo", "OMP_NUM_THREADS": "4"})
    assert (env.job_id, env.cuebot_hosts, env.template_path) == ("j1", ("a:8443", "b"), ("/x", "/y"))
    assert (env.main_host, env.show, env.shot, env.omp_num_threads) == (None, "demo", "", "4")
    assert all(name in ENV_TABLE for name in ("CUE_JOB_ID", "CUEBOT_HOSTS", "CUETRAIN_MAIN_HOST", "SHOW"))


def test_environ_with_copies():
    base = {"A": "1", "B": "2"}
    assert environ_with({"B": "3"}, base) == {"A": "1", "B": "3"} and base["B"] == "2"


def test_cue_plugin_imports_no_opencue_at_import():
    code = ("import sys, cue_plugin.submit.cli, cue_plugin.submit.opencue_farm, cue_plugin.submit.builder, "
            "cue_plugin.frame, cue_plugin.infer_layer; "
            "print(sorted(m for m in ('opencue', 'outline', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
