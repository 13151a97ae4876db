"""The federation lead's provisioning: startup kits with certificates, class allow-lists and authorization policy."""
