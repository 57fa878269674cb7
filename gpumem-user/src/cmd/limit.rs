//! `gpumem limit list|set|clear`: the running agent's limits, changed over
//! its control socket (checked here first, applied by the agent).
use anyhow::Context;

use crate::{
    cli::{LimitAction, LimitArgs},
    cmd::status::table,
    control::{self, Request, Response},
    limits::policy::{spec::parse_target, Limit},
    output::LimitStatus,
    sink::text::human,
};

pub async fn limit(args: LimitArgs) -> anyhow::Result<()> {
    let request = match &args.action {
        LimitAction::List { .. } => Request::LimitList,
        LimitAction::Set { spec } => {
            Limit::parse(spec).with_context(|| format!("limit `{spec}`"))?;
            Request::LimitSet { spec: spec.clone() }
        }
        LimitAction::Clear { target } => {
            parse_target(target).with_context(|| format!("target `{target}`"))?;
            Request::LimitClear { target: target.clone() }
        }
    };
    match (control::request(&args.socket, &request).await?, args.action) {
        (Response::Limits(list), LimitAction::List { json: true }) => {
            println!("{}", serde_json::to_string_pretty(&list)?)
        }
        (Response::Limits(list), _) => print_list(&list),
        (Response::LimitSet { target, action }, _) => println!("limit set on {target}, action {action}"),
        (Response::LimitCleared { target }, _) => println!("limit cleared on {target}"),
        (other, _) => anyhow::bail!("the agent at {} answered {other:?}", args.socket.display()),
    }
    Ok(())
}

fn print_list(list: &[LimitStatus]) {
    if list.is_empty() {
        println!("no limits in force");
        return;
    }
    let mut t = table(&["TARGET", "DEVICE", "USAGE", "HARD", "USED", "SOFT", "ACTION", "VIEW", "SOURCE"], 2);
    for l in list {
        t.add_row([
            l.target.clone(),
            l.device.map_or("all".into(), |d| d.to_string()),
            human(l.usage),
            human(l.hard),
            format!("{}%", l.usage * 100 / l.hard.max(1)),
            l.soft.map_or("-".into(), human),
            l.action.clone(),
            l.view.clone(),
            l.source.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    println!("{t}");
}
