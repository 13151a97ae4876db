"""FedKT-CSD, site side: per-class latent statistics of a frozen autoencoder, and their wire format."""
