"""Conversion between the original ELMo format (bilm-tf / AllenNLP) and Hugging Face checkpoints."""
