"""Signal receivers: the usage rollup follows the turns chat_app stores."""
from django.dispatch import receiver

from chat_app.runs.quota import TurnUsage, turn_usage_recorded
from insights_app.usage import usage_turn_add


@receiver(turn_usage_recorded, sender=TurnUsage, dispatch_uid="insights_usage_rollup")
def usage_rollup_receiver(sender, *, usage: TurnUsage, **kwargs) -> None:
    usage_turn_add(usage=usage)
