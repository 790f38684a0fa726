"""The next round's model: fine-tune a model on the train splits of verified releases, never on a
dev or test split, and write it with a model card that names what it learned from
(``dynaval model train``; see docs/cli.md)."""
