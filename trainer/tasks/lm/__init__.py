"""The language-model task: its model, corpus, tokenizer and token shards."""
