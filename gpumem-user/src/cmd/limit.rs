//! `gpumem limit list|set|clear`: the running agent's limits, changed over
//! its control socket (checked here first, applied by the agent).
use anyhow::bail;

use crate::{
    bpf::limits::LimitStatus,
    cli::{LimitAction, LimitArgs},
    control,
    policy::{spec::parse_target, Limit},
    sink::text::human,
};

pub async fn limit(args: LimitArgs) -> anyhow::Result<()> {
    let command = match &args.action {
        LimitAction::List { .. } => "limit list".to_string(),
        LimitAction::Set { spec } => {
            Limit::parse(spec).map_err(|e| anyhow::anyhow!("limit `{spec}`: {e}"))?;
            format!("limit set {spec}")
        }
        LimitAction::Clear { target } => {
            parse_target(target).map_err(|e| anyhow::anyhow!("target `{target}`: {e}"))?;
            format!("limit clear {target}")
        }
    };
    let answer = control::request(&args.socket, &command).await?;
    let value: serde_json::Value = serde_json::from_str(&answer).map_err(|e| {
        anyhow::anyhow!(
            "the agent at {} answered something else than JSON ({e}): {answer}",
            args.socket.display()
        )
    })?;
    if let Some(err) = value.get("error").and_then(|e| e.as_str()) {
        bail!("the agent refused: {err}");
    }
    match args.action {
        LimitAction::List { json: true } => println!("{}", serde_json::to_string_pretty(&value)?),
        LimitAction::List { json: false } => {
            let list: Vec<LimitStatus> = serde_json::from_value(value)?;
            if list.is_empty() {
                println!("no limits in force");
            }
            for l in list {
                let dev = l.device.map_or(String::new(), |d| format!(" device {d}"));
                let soft = l.soft.map_or(String::new(), |s| format!(" soft {}", human(s)));
                println!(
                    "{}{dev}: {} of {} ({}%){soft}, action {}",
                    l.target,
                    human(l.usage),
                    human(l.hard),
                    l.usage * 100 / l.hard.max(1),
                    l.action
                );
            }
        }
        _ => println!("{value}"),
    }
    Ok(())
}
