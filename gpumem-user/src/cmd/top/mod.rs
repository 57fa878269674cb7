//! `gpumem top`: a live view over the agent's control socket. Each
//! refresh asks the agent for `top` (one answer: status, limits, the
//! latest decisions and failures, the oldest live allocations) while keys
//! are read; the screen is redrawn after each.
//!
//! `model` turns an answer into rows (sorted, filtered), `state` holds
//! the view's state and applies `input`'s actions, `render` draws it into
//! any ratatui frame (tested on a buffer), `terminal` owns the terminal.
mod input;
mod model;
mod render;
mod state;
mod terminal;

#[cfg(test)]
mod fixture;

use std::{future::pending, path::PathBuf};

use crossterm::event::{Event, EventStream};
use futures_util::StreamExt;
use tokio::{task::JoinHandle, time::MissedTickBehavior};

use self::{
    state::{Flow, State},
    terminal::Screen,
};
use crate::{cli::TopArgs, control, output::TopReport};

/// A request to the agent in flight.
type Asking = Option<JoinHandle<Result<TopReport, String>>>;

pub async fn top(args: TopArgs) -> anyhow::Result<()> {
    let mut state = State::new(args.socket.display().to_string(), args.sort, args.filter.clone());
    let mut screen = Screen::enter()?;
    let result = run(&mut screen, &mut state, &args).await;
    drop(screen);
    result
}

/// Asks, reads keys and draws until a key quits.
async fn run(screen: &mut Screen, state: &mut State, args: &TopArgs) -> anyhow::Result<()> {
    let mut keys = EventStream::new();
    let mut tick = tokio::time::interval(args.interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut asking: Asking = None;
    loop {
        screen.terminal.draw(|frame| state.page = render::draw(frame, state))?;
        tokio::select! {
            event = keys.next() => match event {
                Some(Ok(Event::Key(key))) => {
                    let action = input::action(key, state.typing.is_some(), state.filter.is_some());
                    if action.is_some_and(|a| state.apply(a) == Flow::Quit) {
                        return Ok(());
                    }
                }
                Some(Ok(_)) => {} // a resize: drawn again
                Some(Err(e)) => return Err(anyhow::Error::new(e).context("reading the terminal")),
                None => return Ok(()),
            },
            _ = tick.tick(), if asking.is_none() => asking = Some(tokio::spawn(ask(args.socket.clone()))),
            answer = answered(&mut asking) => {
                asking = None;
                state.update(answer);
            }
        }
    }
}

/// The agent's `top` answer, or why there is none, in words.
async fn ask(socket: PathBuf) -> Result<TopReport, String> {
    control::top(&socket).await.map_err(|e| crate::chain(&e))
}

/// The answer in flight, once it comes; never, where none is.
async fn answered(asking: &mut Asking) -> Result<TopReport, String> {
    match asking {
        Some(task) => task.await.unwrap_or_else(|e| Err(format!("asking the agent failed: {e}"))),
        None => pending().await,
    }
}
