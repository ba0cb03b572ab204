"""Django management commands of pyqueue.django."""
