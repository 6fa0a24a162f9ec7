"""Model sizes and training recipes for `pretrain.py --preset NAME`; every training value can be overridden on the
command line (`--batch-size`, `--learning-rate`, ...).

`model` holds `ElmoConfig` fields. The released ELMo sizes are trained as bilm-tf trained the original
(`bin/train_elmo.py`): 128 rows per device, windows of 20 words, 8192 negative samples, dropout 0.1, Adagrad with
learning rate 0.2, gradient norm clipped at 10.
"""

from hf_elmo.configuration_elmo import ORIGINAL_CHAR_CNN_FILTERS

# The options every preset starts from: bilm-tf's recipe.
TRAINING_DEFAULTS = {
    "batching": "stream",
    "batch_size": 128,
    "unroll_steps": 20,
    "shuffle": True,
    "group_by_length": False,  # (sentence batching)
    "negative_samples": 8192,
    "softmax_init": "random",
    "dropout": 0.1,
    "optimizer": "adagrad",
    "learning_rate": 0.2,
    "lr_scheduler": "constant",
    "warmup_steps": 0,
    "weight_decay": 0.0,
    "max_grad_norm": 10.0,
    "gradient_accumulation_steps": 1,
    "epochs": 10.0,
    "max_train_minutes": 0.0,  # 0: train for `epochs`; otherwise for this long (see pretrain.py's TrainingClock)
    "save_steps": 1250,
    "eval_steps": 0,
    "logging_steps": 100,
}

# The tiny architecture of the reference test fixtures (`shared/fixtures`), 32-wide layers.
TINY_MODEL = {
    "char_embedding_dim": 4,
    "char_cnn_filters": ((1, 4), (2, 8), (3, 16), (4, 32), (5, 64)),
    "num_highway_layers": 2,
    "cell_size": 64,
    "projection_dim": 16,
    "num_lstm_layers": 2,
}

# Kim et al. (2016)'s small character-aware model: filters of width w, 25 w of them, one highway layer.
KIM_SMALL_FILTERS = tuple((width, 25 * width) for width in range(1, 7))
# Kim et al. (2016)'s large one: min(200, 50 w) filters of width w up to 7, two highway layers.
KIM_LARGE_FILTERS = tuple((width, min(200, 50 * width)) for width in range(1, 8))

PRESETS = {
    "tiny": {
        "description": "the fixtures' 32-wide model, for tests and trying the program out",
        "model": TINY_MODEL,
        "training": {"batch_size": 4, "unroll_steps": 10, "negative_samples": 16, "save_steps": 10, "logging_steps": 1},
    },
    "ptb-cpu": {
        "description": "Penn Treebank in an hour on 2 CPU cores: 56 minutes of training steps, about 14 epochs on the fast path",
        "model": {
            "char_embedding_dim": 16,
            "char_cnn_filters": KIM_SMALL_FILTERS,
            "num_highway_layers": 1,
            "cell_size": 300,
            "projection_dim": 300,
            "num_lstm_layers": 2,
        },
        "training": {
            "batch_size": 64,
            "unroll_steps": 20,
            "shuffle": False,  # the standard PTB setting: the text in order, so the state carries real context
            "negative_samples": 2048,
            "softmax_init": "unigram",  # start as the unigram model: the sampled softmax calibrates rare words slowly
            # After 6 epochs 0.1 and 0.2 did as well (forward test perplexity 127.92 and 130.06 for two runs of 0.1,
            # 130.27 for 0.2: within the spread of runs); 12 epochs of 0.2 gave 114.63. The fast training path fits
            # about 14 epochs in the hour, where the model overfits sooner: 0.2 (14.3 epochs: forward test 107.77).
            "dropout": 0.2,
            "optimizer": "adamw",
            # Tried on PTB (validation perplexity): 4e-3 wins one-epoch trials (2e-3 260, 4e-3 232, 8e-3 280) but
            # loses over 6 epochs (140 against 2e-3's 135; test 135.1 against 130.3). In one
            # epoch's time, the full softmax instead of 2048 negatives gave 346 and 32 rows 252.
            "learning_rate": 2e-3,
            "lr_scheduler": "linear",
            "warmup_steps": 100,
            "max_grad_norm": 5.0,
            # As many epochs as the hour holds (726 steps an epoch; a step takes about 0.29 s on the fast path here,
            # 0.4 s on the plain one, when the machine is quiet); the start, the evaluations and `make ptb-cpu`'s
            # test pass take the rest of it (about 2 minutes).
            "max_train_minutes": 56.0,
            "save_steps": 500,
            "eval_steps": 2178,  # every 3 epochs: a full-softmax pass over valid costs about 12 s
            "logging_steps": 10,
        },
    },
    "default": {
        "description": "the default model shipped with hf_elmo: English and Chinese text, about 95 minutes on 2 CPU cores",
        "model": {
            "char_embedding_dim": 16,
            "char_cnn_filters": KIM_SMALL_FILTERS,
            "num_highway_layers": 1,
            # Four-minute trials on the fast path (held-out average perplexity, same seed): cells of 640 took 525
            # steps and gave 330.7, cells of 512 took 506 steps and gave 334.6 (dropout 0: 331.8); the step's time
            # is mostly the softmax, the character CNN and the optimizer, so the wider LSTM costs little. 640 keeps
            # the checkpoint under 30 MB (26.5 MB).
            "cell_size": 640,
            "projection_dim": 256,
            "num_lstm_layers": 2,
        },
        "training": {
            "batch_size": 64,
            "unroll_steps": 20,
            "negative_samples": 2048,
            "softmax_init": "unigram",
            "dropout": 0.1,
            "optimizer": "adamw",
            "learning_rate": 2e-3,
            "lr_scheduler": "linear",
            "warmup_steps": 200,
            "max_grad_norm": 5.0,
            "epochs": 2.5,  # 12,158 steps, 15.6M words: about 90 minutes on 2 cores (a fixed count: reproducible)
            "save_steps": 500,
            "eval_steps": 4863,  # every epoch
            "logging_steps": 20,
        },
    },
    "ptb-gpu": {
        "description": "Penn Treebank on one GPU: Kim et al. (2016)'s large character-aware size, full softmax",
        "model": {
            "char_embedding_dim": 16,
            "char_cnn_filters": KIM_LARGE_FILTERS,
            "num_highway_layers": 2,
            "cell_size": 650,
            "projection_dim": 650,
            "num_lstm_layers": 2,
        },
        "training": {
            "batch_size": 20,
            "unroll_steps": 35,
            "shuffle": False,
            "negative_samples": 0,
            "softmax_init": "unigram",
            "dropout": 0.5,
            "optimizer": "adamw",
            "learning_rate": 1e-3,
            "lr_scheduler": "linear",
            "warmup_steps": 500,
            "max_grad_norm": 5.0,
            "epochs": 40.0,
            "save_steps": 2000,
            "eval_steps": 2654,  # every 2 epochs (1,327 steps each)
            "logging_steps": 50,
        },
    },
    "small": {
        "description": "the released Small ELMo (2x1024_128_2048cnn_1xhighway, 13.6M parameters without softmax)",
        "model": {"char_cnn_filters": ORIGINAL_CHAR_CNN_FILTERS, "num_highway_layers": 1, "cell_size": 1024, "projection_dim": 128},
        "training": {},
    },
    "medium": {
        "description": "the released Medium ELMo (2x2048_256_2048cnn_1xhighway, 28.0M parameters without softmax)",
        "model": {"char_cnn_filters": ORIGINAL_CHAR_CNN_FILTERS, "num_highway_layers": 1, "cell_size": 2048, "projection_dim": 256},
        "training": {},
    },
    "original": {
        "description": "the original ELMo (2x4096_512_2048cnn_2xhighway, 93.6M parameters without softmax)",
        "model": {"char_cnn_filters": ORIGINAL_CHAR_CNN_FILTERS, "num_highway_layers": 2, "cell_size": 4096, "projection_dim": 512},
        "training": {},
    },
}


def preset_names() -> list[str]:
    return list(PRESETS)


def training_settings(name: str) -> dict:
    """The preset's training options over bilm-tf's defaults."""
    return {**TRAINING_DEFAULTS, **PRESETS[name]["training"]}
