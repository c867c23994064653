"""Named jobs: a model, its data preparation and its settings. `acceltrain train NAME` runs one."""

from acceltrain.errors import UsageError
from acceltrain.recipes import gemma_tiny, mnist_mlp

RECIPES = {mnist_mlp.NAME: mnist_mlp, gemma_tiny.NAME: gemma_tiny}
DEFAULT = mnist_mlp.NAME


def get(name: str):
    try:
        return RECIPES[name]
    except KeyError:
        raise UsageError(
            f"Unknown recipe: {name!r}. Valid: {', '.join(RECIPES)}. For your own model use "
            "--model FILE.py:FUNCTION."
        ) from None
