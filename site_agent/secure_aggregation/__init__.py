"""The site's part in secure aggregation with dropout recovery (`protocol`, Bonawitz et al.), its session keys
signed with the site's certificate (`identity`), and the weight kinds' masked rounds (`masked_updates`)."""
