"""lite-app: a light Flower App for deployment checks (numpy model, sleep-emulated cost)."""
