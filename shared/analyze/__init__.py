"""Analyze: the LLM stage's prompts, validated reply, repair, degraded answer and cache."""
