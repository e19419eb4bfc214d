"""kopf registrations. `kopf run -m glm_operator.handlers` loads every handler module below."""

from glm_operator.handlers import admission, canary, glmdeployment, glmimage, resync, settings

__all__ = ["admission", "canary", "glmdeployment", "glmimage", "resync", "settings"]
