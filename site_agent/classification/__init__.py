"""Scoring an image classifier at a site: what an ISIC evaluation computes and what of it may leave."""
