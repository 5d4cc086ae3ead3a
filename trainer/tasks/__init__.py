"""What is trained: the Task protocol, the smoke test, and the language-model task."""
