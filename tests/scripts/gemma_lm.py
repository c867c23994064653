"""keras_hub Gemma causal LMs for `acceltrain plan`, built from configs (random weights; plan builds them from
shapes alone): a tiny one with LoRA for the default test set, and Gemma 2B (the tests/presets/gemma_2b config)
with LoRA or fully fine-tuned with AdamW."""

from pathlib import Path

GEMMA_2B = Path(__file__).resolve().parent.parent / "presets" / "gemma_2b"
TINY = dict(vocabulary_size=128, num_layers=2, num_query_heads=4, num_key_value_heads=1, hidden_dim=128,
            intermediate_dim=512, head_dim=32)  # recipes/gemma_tiny.py's shapes


def _causal_lm(backbone, optimizer):
    import keras
    import keras_hub

    model = keras_hub.models.GemmaCausalLM(backbone=backbone, preprocessor=None)
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  weighted_metrics=[keras.metrics.SparseCategoricalAccuracy()])
    return model


def tiny_lora():
    """The ordinary keras_hub LoRA fine-tune: backbone.enable_lora(4), then compile."""
    import keras
    import keras_hub

    backbone = keras_hub.models.GemmaBackbone(**TINY)
    backbone.enable_lora(4)
    return _causal_lm(backbone, keras.optimizers.AdamW(1e-3, weight_decay=0.01))


def tiny_full():
    import keras
    import keras_hub

    return _causal_lm(keras_hub.models.GemmaBackbone(**TINY), keras.optimizers.AdamW(1e-3, weight_decay=0.01))


def gemma_2b_full_adamw():
    """Gemma 2B from its preset config, every weight trained with AdamW in float32."""
    import keras
    import keras_hub

    backbone = keras_hub.models.GemmaBackbone.from_preset(str(GEMMA_2B), load_weights=False)
    return _causal_lm(backbone, keras.optimizers.AdamW(5e-5, weight_decay=0.01))


def gemma_2b_lora():
    """The same with LoRA of rank 4, as the keras_hub fine-tuning guide does."""
    import keras
    import keras_hub

    backbone = keras_hub.models.GemmaBackbone.from_preset(str(GEMMA_2B), load_weights=False)
    backbone.enable_lora(4)
    return _causal_lm(backbone, keras.optimizers.AdamW(5e-5, weight_decay=0.01))


def raises():
    """A model function that fails in the user's own code."""
    return _helper_that_fails()


def _helper_that_fails():
    raise ValueError("vocabulary_size must be positive")
