"""The web console's static assets (plain ES modules and CSS, no build step)."""
