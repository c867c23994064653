"""backends/__init__.py: the backend Keras loads with when it is imported after acceltrain and nobody chose one."""

import json

import pytest

from acceltrain import backends
from tests import support


@pytest.mark.parametrize("env, keras_loaded, expected", [
    ({}, False, "jax"),  # nobody chose: acceltrain's default, before Keras's own (tensorflow) can apply
    ({"KERAS_BACKEND": "tensorflow"}, False, None),  # the user's variable stands
    ({"KERAS_BACKEND": "jax"}, False, None),
    ({}, True, None),  # too late: Keras already chose
    ({"USERS_FILE": "tensorflow"}, False, None),  # the user's keras.json stands (Keras reads it)
    ({"KERAS_WRITTEN": ""}, False, "jax"),  # the file Keras writes itself on its first import is nobody's choice
])
def test_the_default_is_set_only_where_nobody_chose(tmp_path, env, keras_loaded, expected):
    env = {**env, "KERAS_HOME": str(tmp_path)}
    if "USERS_FILE" in env:
        (tmp_path / "keras.json").write_text(json.dumps({"backend": env.pop("USERS_FILE")}))
    if env.pop("KERAS_WRITTEN", None) is not None:
        (tmp_path / "keras.json").write_text(json.dumps(backends.KERAS_WRITTEN_CONFIG))
    before = dict(env)
    assert backends.default_before_keras(env, keras_loaded) == expected
    assert env == (before if expected is None else {**before, "KERAS_BACKEND": expected})


def test_keras_imported_after_acceltrain_loads_with_jax_and_the_banner_says_why(tmp_path):
    code = ("import acceltrain, keras\n"
            "print(keras.backend.backend())\n"
            "acceltrain.connect()\n")
    done = support.python("-c", code, timeout=120, HOME=str(tmp_path))  # no KERAS_BACKEND (support.env drops it)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["jax"]
    assert "acceltrain: jax on cpu" in done.stderr
    assert "backend: the default, set as Keras was imported after acceltrain" in done.stderr
