"""Running the site's startup kit: the kit and its certificate checks (`startup`), the site configuration
(`site_config`), the lead's signed kit policy (`kit_policy`), the site's own key and request (`enrolment`), the
preflight (`preflight`, `link`), and starting and supervising FLARE's client (`start`, `processes`, `service`)."""
