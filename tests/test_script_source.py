"""script_source.py: the Keras backend a script chooses, read from its source before it runs (issue 22: a script
setting os.environ["KERAS_BACKEND"] = "tensorflow" ran on JAX under `acceltrain run`, the banner saying "the
default")."""

import pytest

from acceltrain import script_source


@pytest.mark.parametrize(
    "source, backend, forced, said, line",
    [
        ('import os\nos.environ["KERAS_BACKEND"] = "tensorflow"\nimport keras\n', "tensorflow", True,
         "os.environ['KERAS_BACKEND'] = 'tensorflow'", 2),
        ('import os\nos.environ.setdefault("KERAS_BACKEND", "jax")\n', "jax", False,
         "os.environ.setdefault('KERAS_BACKEND', 'jax')", 2),
        ('import keras\nkeras.config.set_backend("tensorflow")\n', "tensorflow", True,
         "keras.config.set_backend('tensorflow')", 2),
        ('from os import environ\nenviron["KERAS_BACKEND"] = "jax"\n', "jax", True, "", 2),
        ('import os, sys\nos.environ["KERAS_BACKEND"] = sys.argv[1]\n', None, True,
         "os.environ['KERAS_BACKEND'] = sys.argv[1]", 2),  # computed: cannot be read before it runs
        ('import os\nif True:\n    os.environ["KERAS_BACKEND"] = "jax"\nos.environ["KERAS_BACKEND"] = "tensorflow"\n',
         "jax", True, "", 3),  # the first in the file
    ],
)
def test_the_scripts_own_backend_is_read_from_its_source(source, backend, forced, said, line):
    choice = script_source.backend_choice(source)
    assert (choice.backend, choice.forced, choice.line) == (backend, forced, line)
    assert said in choice.said


@pytest.mark.parametrize("source", ['import keras\nprint(os.environ.get("KERAS_BACKEND"))\n',
                                    'os.environ["OTHER"] = "tensorflow"\n', "def broken(:\n", ""])
def test_a_script_that_chooses_nothing_gives_none(source):
    assert script_source.backend_choice(source) is None


@pytest.mark.parametrize(
    "backend, forced, env, plain_run",
    [("tensorflow", True, None, "tensorflow"), ("tensorflow", True, "jax", "tensorflow"),  # os.environ[...] = wins
     ("tensorflow", False, None, "tensorflow"), ("tensorflow", False, "jax", "jax"),  # setdefault yields to the env
     (None, True, "jax", "jax")],
)
def test_the_backend_a_plain_run_ends_with(backend, forced, env, plain_run):
    assert script_source.BackendChoice(backend, forced, "").over(env) == plain_run
